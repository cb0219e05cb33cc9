"""The Streamlit dashboard (the app layer). Run it with ``streamlit run app.py``.

Only this package and ``app.py`` import Streamlit. ``state`` holds the shared
sidebar (trace choice and upload) and the cached loaders; ``pages/`` holds one
thin script per page: widgets -> one ddpsim call -> one figure.
Importing ``ddpsim`` never imports this package.
"""
