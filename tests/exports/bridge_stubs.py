import importlib.abc, importlib.machinery, sys, types
# Not installable without a GPU build (transformer_engine) or not needed to build a config: stubbed.
STUB = {"modelopt", "mistral_common", "datasets", "diffusers", "wandb", "qwen_vl_utils", 
        "fla", "timm", "open_clip", "mlflow", "comet_ml", "flashinfer", "fast_hadamard_transform"}
TE_USERS = ("megatron/bridge/peft/", "megatron/bridge/models/gpt_full_te_layer_autocast_spec.py")
def _init(self, *args, **kwargs):
    pass


class _Meta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Meta(name, (), {"__init__": _init})
class _Any(types.ModuleType):
    __path__ = []
    def __getattr__(self, name):
        if name.startswith("__"): raise AttributeError(name)
        v = _Meta(name, (), {"__init__": _init})
        setattr(self, name, v); return v
class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        top = name.split(".")[0]
        if top in STUB:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        if top == "transformer_engine":
            f = sys._getframe(1)
            while f is not None:
                if any(u in f.f_code.co_filename for u in TE_USERS):
                    return importlib.machinery.ModuleSpec(name, self, is_package=True)
                f = f.f_back
        return None
    def create_module(self, spec):
        m = _Any(spec.name); m.__version__ = "0.0.0"; return m
    def exec_module(self, m): pass
sys.meta_path.insert(0, _Finder())
