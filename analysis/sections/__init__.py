"""The analysis's sections: each turns the loaded tables into its part of the summary and its tables."""
