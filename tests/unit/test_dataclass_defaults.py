"""No record field in agent/ or checks/ has a default Python 3.11 refuses at import.

Python 3.11 rejects a field default whose type is unhashable (dataclasses.py: "mutable
default ... use default_factory"); 3.9 and 3.10 reject only list, dict and set, and from 3.12
a mappingproxy is hashable. The unit tiers run 3.9 and 3.13, neither of which would see a
mappingproxy default fail, while Debian 12 and Ubuntu 22.04+ run the packaged agent on 3.11
(tests/integration/test_packages.py caught one such default once). So the rule is checked
here by introspection, the 3.11 way, on whatever interpreter runs the suite. The agent's
classes are records (agent/records.py), which refuse such a default on every interpreter; this
walk keeps holding it should a module go back to dataclasses.
"""
import dataclasses
import importlib
import inspect
import pkgutil
from types import MappingProxyType

import agent
import checks
from agent import records

# Types whose instances 3.11 refuses as a default: unhashable there.
REFUSED_ON_311 = (list, dict, set, bytearray, MappingProxyType)


def refused_on_311(default):
    return isinstance(default, REFUSED_ON_311) or type(default).__hash__ is None


def _modules():
    for pkg in (agent, checks):
        yield pkg.__name__
        for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            yield info.name


def _problems():
    found = []
    for name in _modules():
        if name.endswith("__main__"):
            continue
        module = importlib.import_module(name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != name:
                continue
            if dataclasses.is_dataclass(cls):
                defaults = [(f.name, f.default) for f in dataclasses.fields(cls)
                            if f.default is not dataclasses.MISSING]
            elif records.is_record(cls):
                defaults = [(f.name, f.default) for f in records.fields(cls)
                            if f.default is not records.MISSING]
            else:
                continue
            for field_name, default in defaults:
                if refused_on_311(default):
                    found.append(f"{name}.{cls.__name__}.{field_name}: {type(default).__name__}")
    return found


def test_no_field_default_python_311_refuses():
    assert _problems() == []


def test_the_rule_catches_what_311_refuses():
    # Values, not a dataclass built with them: on 3.11 that class would not even be created.
    assert refused_on_311(MappingProxyType({}))
    assert refused_on_311({}) and refused_on_311([]) and refused_on_311(set())
    assert not refused_on_311(()) and not refused_on_311("") and not refused_on_311(None)
