"""Comparison report across stages: tables, charts, Markdown and HTML, from traces and bench results."""
