"""ddpsim.experiments: real runs against predictions.

calibrate (time the allreduce and the CPU time slice in real gloo ranks), validate
(one trace pair, or ``--grid``), grid (record a grid of runs, predict each), compare
(a prediction against a measurement), ladder (the same model at four levels of
realism). The only code that imports both ``ddpsim.record`` and ``ddpsim.sim``.
"""
