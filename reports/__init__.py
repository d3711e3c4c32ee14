"""`bench report`: one self-contained HTML comparison of result records (plus Markdown
and CSV). Every number comes from the records and the harness's metrics and cost
modules; this package only arranges, plots and escapes them."""
