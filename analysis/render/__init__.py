"""Output: the text report, plots, the files written."""
