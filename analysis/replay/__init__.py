"""What a fix buys, by replaying the captured timeline with the fix applied (rules/prediction.py asks it)."""
