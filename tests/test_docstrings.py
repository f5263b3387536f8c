"""Every public function, method and class of the project's packages has a docstring (one line is enough where the
name says the rest). Public: no name on its path starts with an underscore; functions nested in functions are not
counted."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("analysis", "profiling", "reports", "workloads", "nsys_core", "nsys_transfer")


def public_definitions(tree: ast.AST, prefix: str = ""):
    """(qualified name, node) of every function and class defined at module level or in a class, recursively."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = prefix + node.name
            if not node.name.startswith("_"):
                yield name, node
                if isinstance(node, ast.ClassDef):
                    yield from public_definitions(node, name + ".")


def undocumented():
    """Yield 'path:line name' for every public definition without a docstring."""
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for name, node in public_definitions(ast.parse(path.read_text(), filename=str(path))):
                if ast.get_docstring(node) is None:
                    yield f"{path.relative_to(ROOT)}:{node.lineno} {name}"


def test_every_public_definition_has_a_docstring():
    missing = list(undocumented())
    assert not missing, "public functions and classes without a docstring:\n" + "\n".join(missing)


def test_the_check_sees_what_it_should():
    tree = ast.parse("def f():\n    pass\n\nclass C:\n    def m(self):\n        '''m.'''\n    def _p(self):\n"
                     "        pass\n\nclass _Hidden:\n    def m(self):\n        pass\n")
    assert [(n, ast.get_docstring(d)) for n, d in public_definitions(tree)] == [("f", None), ("C", None), ("C.m", "m.")]
