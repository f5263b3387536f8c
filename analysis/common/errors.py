class TraceError(Exception):
    """The one error type of the analysis: its message is one line saying what is wrong and what to do."""
