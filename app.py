"""ddpsim dashboard: ``streamlit run app.py`` (settings in .streamlit/config.toml).

The entry point draws the shared sidebar (which trace is open, upload, downloads)
and runs the chosen page from ddpsim/app/pages/. Add a page by adding a file there
and an ``st.Page`` below.
"""
from pathlib import Path

import streamlit as st

from ddpsim.app import state

PAGES = Path(__file__).resolve().parent / "ddpsim" / "app" / "pages"

st.set_page_config(page_title="ddpsim: see DDP", page_icon=":material/timeline:", layout="wide")
page = st.navigation([
    st.Page(PAGES / "timeline.py", title="Timeline", icon=":material/timeline:", default=True),
    st.Page(PAGES / "buckets.py", title="Buckets", icon=":material/inventory_2:"),
    st.Page(PAGES / "compare.py", title="Compare", icon=":material/compare:"),
    st.Page(PAGES / "whatif.py", title="What-if", icon=":material/tune:", url_path="whatif"),
    st.Page(PAGES / "record.py", title="Record", icon=":material/radio_button_checked:"),
    st.Page(PAGES / "learn.py", title="Learn", icon=":material/school:"),
])
state.sidebar()
state.keep_widgets()  # the What-if page's choices survive a visit to another page
page.run()
