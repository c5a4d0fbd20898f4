"""The type stubs (python/weir/__init__.pyi) say what the package takes:
every keyword a stub lists is one the function accepts, at its stub default,
and every public name is in the stubs."""

import ast
import pathlib

import weir

STUB = pathlib.Path(weir.__file__).with_name("__init__.pyi")


def stub_functions():
    tree = ast.parse(STUB.read_text())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            out[node.name] = {a.arg: ast.literal_eval(d) for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults)}
    return out, {getattr(n, "name", None) for n in tree.body} | {
        t.id for n in tree.body if isinstance(n, (ast.AnnAssign,)) for t in [n.target]
    }


def test_the_stubs_are_installed_and_typed():
    assert STUB.exists() and STUB.with_name("py.typed").exists()


def test_every_public_name_is_in_the_stubs():
    _, names = stub_functions()
    assert set(weir.__all__) <= names


def test_every_stub_keyword_is_taken_at_its_default(synth):
    funcs, _ = stub_functions()
    assert set(funcs) == {"count", "packets", "flows", "streams"}
    for name, kwargs in funcs.items():
        assert len(kwargs) >= 29, name
        result = getattr(weir, name)(synth, **kwargs)
        if name == "packets":
            assert sum(1 for _ in result) == 20000
        elif name == "streams":
            assert sum(1 for _ in result) > 0
        elif name == "count":
            assert result.packets == 20000
        else:
            assert len(result) > 0


def test_every_flow_column_is_documented_in_the_stub_and_the_docstring():
    tree = ast.parse(STUB.read_text())
    stub_doc = ast.get_docstring(next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Flows"))
    for name, pandas, arrow, _ in weir.FLOW_COLUMNS:
        assert name in stub_doc, name
        assert f"``{name}``: {pandas} / {arrow}:" in weir.Flows.__doc__, name
