"""The public surface: every name documented, and the stubs cover what the module has."""

import ast
import inspect
import pathlib

import accio


def _stub_names():
    stub = pathlib.Path(accio.__file__).with_name("__init__.pyi")
    tree = ast.parse(stub.read_text())
    names, members = set(), {}
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            members[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)} | {
                n.target.id for n in node.body if isinstance(n, ast.AnnAssign)
            }
    return names, members


def test_py_typed_and_stubs_ship_with_the_package():
    here = pathlib.Path(accio.__file__).parent
    assert (here / "py.typed").exists() and (here / "__init__.pyi").exists()


def test_every_public_name_is_in_the_stubs_and_documented():
    names, members = _stub_names()
    for name in accio.__all__:
        obj = getattr(accio, name)
        if inspect.ismodule(obj):
            assert obj.__doc__, name
            continue
        assert name in names, f"{name} missing from __init__.pyi"
        assert obj.__doc__ and obj.__doc__.strip(), f"{name} has no docstring"
        if inspect.isclass(obj) and not issubclass(obj, BaseException):
            for m in members[name]:
                if m.startswith("__"):
                    continue
                attr = getattr(obj, m, None)
                if attr is None:  # an instance attribute (Container.path)
                    continue
                if not callable(attr) and not isinstance(attr, property) and not hasattr(attr, "__get__"):
                    continue
                assert attr.__doc__ and attr.__doc__.strip(), f"{name}.{m} has no docstring"
            public = {m for m in vars(obj) if not m.startswith("_")}
            assert public <= members[name], f"{name}: {public - members[name]} not in stubs"
    for fn in (accio.results.load, accio.results.load_rows):
        assert fn.__doc__
