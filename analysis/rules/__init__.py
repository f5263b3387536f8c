"""The findings: rules that read the computed sections and say what a limit costs and what to do next."""
