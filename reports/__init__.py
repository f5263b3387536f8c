"""Comparison report across stages: tables, charts, Markdown and HTML, from traces and bench results."""
if __name__ == "reports":  # `python -m reports` in a checkout: one package object, nsys_transfer.reports
    import importlib, sys
    sys.modules[__name__] = importlib.import_module("nsys_transfer.reports")
