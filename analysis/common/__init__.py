"""The analysis's shared ground, below every step: errors, intervals, CUDA API names, schema, spill files, memory."""
