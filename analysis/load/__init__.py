"""Reading an export: the handle (trace.py), the column reader, typed tables, OS-runtime zones, the journal and validation."""
