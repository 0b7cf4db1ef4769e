"""Import stubs for checking megatron_bridge.py on a CPU machine (tests/exports/check_megatron_bridge.py imports this
before any megatron module).

megatron-bridge imports, at module level, packages that building and validating a ConfigContainer never calls:
hub and logging clients (wandb, mlflow, comet_ml), model families' and diffusion's dependencies (timm, open_clip,
diffusers, qwen_vl_utils, mistral_common, fla), GPU-only kernels (flashinfer, fast_hadamard_transform) and modelopt.
They are not installed (tests/exports/bridge-requirements.txt) and stand here as empty modules whose every attribute
is an empty class. Transformer Engine is different: Megatron-Core checks for it (HAVE_TE) and must see it absent, as
on any machine without it; only the two Bridge modules that import it unguarded (its PEFT layers, the full-TE layer
spec) get the stub, and check_megatron_bridge.py removes it from sys.modules once megatron.bridge is imported.
"""
import importlib.abc
import importlib.machinery
import sys
import types

STUBBED = {"modelopt", "mistral_common", "datasets", "diffusers", "wandb", "qwen_vl_utils", "fla", "timm",
           "open_clip", "mlflow", "comet_ml", "flashinfer", "fast_hadamard_transform"}
TE_VERSION = "2.14.0"
TE_IMPORTERS = ("megatron/bridge/peft/", "megatron/bridge/models/gpt_full_te_layer_autocast_spec.py")


def _init(self, *args, **kwargs):
    pass


class _Meta(type):
    """An empty class whose attributes are empty classes (te.ops.Sequential, used in annotations and isinstance)."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Meta(name, (), {"__init__": _init})


class _Module(types.ModuleType):
    __path__ = []  # a package: submodules import through the finder below

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = _Meta(name, (), {"__init__": _init})
        setattr(self, name, value)
        return value


def _imported_by_te_user():
    frame = sys._getframe(2)
    while frame is not None:
        if any(p in frame.f_code.co_filename for p in TE_IMPORTERS):
            return True
        frame = frame.f_back
    return False


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        top = name.split(".")[0]
        if top in STUBBED or (top == "transformer_engine" and _imported_by_te_user()):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _Module(spec.name)
        # The version Bridge's TE checks read (is_te_min_version): the TE of the container Bridge's 26.04 release ran
        # (Megatron-Bridge v0.4.2 docs/releases/software-versions.md: TE 2.14), as a GPU run would have it.
        module.__version__ = TE_VERSION
        return module

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, _Finder())
