"""The tests, one folder per part of the package (``tests/nn/`` tests ``attncourse/nn/``).

Every folder of tests is a package, so that two folders may hold files of the same name
(``tests/chapters/ch12_long_context/test_checks.py`` and
``tests/chapters/ch14_attention_as_memory/test_checks.py``) under pytest's default
``prepend`` import mode: pytest imports each as ``tests.chapters.<chapter>.test_checks``,
with the checkout's root on ``sys.path``. Helpers and fixtures are imported the same way
(``from tests.check_helpers import ...``). ``tests/browser/`` is no package: it runs on its
own (``make browser``).
"""
