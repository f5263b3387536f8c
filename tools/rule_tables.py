"""Write the docs' tables of rules (docs/json-schema.md) from the rules' declarations (analysis/rules/rule_table.py):
run it after adding or changing a rule; tests/test_rule_registry.py fails until the committed tables are these."""
from __future__ import annotations

import sys
from pathlib import Path

from nsys_transfer.analysis.rules.rule_table import with_tables

DOCS = Path(__file__).resolve().parent.parent / "docs" / "json-schema.md"


def main() -> int:
    """Rewrite the tables in place; say whether they changed."""
    text = DOCS.read_text()
    new = with_tables(text)
    if new != text:
        DOCS.write_text(new)
    print(f"{DOCS}: {'tables rewritten' if new != text else 'tables already current'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
