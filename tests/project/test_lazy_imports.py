"""The packages' ``__init__`` files re-export lazily (attncourse/lazy.py): every public name still
imports, and importing the GPT loads only what a GPT needs."""

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import attncourse

PACKAGES = sorted(p.parent.name for p in Path(attncourse.__file__).parent.glob("*/__init__.py")
                  if p.parent.name not in ("chapters", "course"))


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_imports(package):
    module = importlib.import_module(f"attncourse.{package}")
    for name in getattr(module, "__all__", ()):
        assert getattr(module, name) is not None, (package, name)
        assert name in dir(module)
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        module.no_such_name  # noqa: B018


def test_a_function_named_as_its_module_stays_the_function():
    # As when the __init__ files imported everything: the function, whichever is imported first.
    import attncourse.functional.flash_attention  # noqa: F401
    from attncourse.functional import flash_attention

    assert callable(flash_attention) and not isinstance(flash_attention, type(sys))


def test_importing_the_gpt_loads_less_than_half_the_modules_it_did():
    # 47 attncourse modules before the lazy __init__ files, image captioning and the canvases among them.
    code = ("import json, sys, attncourse.nn.gpt; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('attncourse'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    loaded = json.loads(done.stdout)
    # 30: the spec imports the package's attention variants, one module each (they register
    # themselves; no cycle); eight variants in six modules since softcap, cla and dsa
    assert len(loaded) <= 30, loaded
    assert not any(m.endswith(("image_attention", "canvases", "transformer", "rnn")) for m in loaded), loaded
