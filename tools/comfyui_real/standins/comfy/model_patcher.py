"""STAND-IN for ComfyUI's comfy/model_patcher.py (written for tools/comfyui_real).

The real ModelPatcher (weight patches, LoRA, hooks, offloading) imports most of ComfyUI. This
keeps the part the h3rt node and a sampling step touch, with the same names and behaviour:
- .model (the BaseModel), .patches, .wrappers {type: {key: [fn]}}, .callbacks,
  .object_patches {dotted name: obj}, .model_options {"transformer_options": {...}};
- clone(): a new patcher on the same model; wrappers/callbacks copied with
  patcher_extension.copy_nested_dicts (the real file's helper), object patches and
  model_options copied;
- add_wrapper_with_key(type, key, fn), add_object_patch(name, obj);
- patch_model() / unpatch_model(): set / restore the object patches on the model by dotted
  attribute path (as the real one does when it loads the model for sampling)."""
import copy

import comfy.patcher_extension


class ModelPatcher:
    def __init__(self, model, load_device=None, offload_device=None):
        self.model = model
        self.load_device, self.offload_device = load_device, offload_device
        self.patches = {}
        self.wrappers = {}
        self.callbacks = {}
        self.object_patches = {}
        self.object_patches_backup = {}
        self.model_options = {"transformer_options": {}}

    def clone(self):
        n = ModelPatcher(self.model, self.load_device, self.offload_device)
        n.patches = {k: list(v) for k, v in self.patches.items()}
        n.wrappers = comfy.patcher_extension.copy_nested_dicts(self.wrappers)
        n.callbacks = comfy.patcher_extension.copy_nested_dicts(self.callbacks)
        n.object_patches = dict(self.object_patches)
        n.model_options = copy.deepcopy(self.model_options)
        return n

    def add_wrapper_with_key(self, wrapper_type, key, wrapper):
        self.wrappers.setdefault(wrapper_type, {}).setdefault(key, []).append(wrapper)

    def add_object_patch(self, name, obj):
        self.object_patches[name] = obj

    @staticmethod
    def _resolve(obj, name):
        *path, attr = name.split(".")
        for p in path:
            obj = getattr(obj, p)
        return obj, attr

    def patch_model(self):
        for name, obj in self.object_patches.items():
            owner, attr = self._resolve(self.model, name)
            if name not in self.object_patches_backup:
                self.object_patches_backup[name] = owner.__dict__.get(attr, _ABSENT)
            setattr(owner, attr, obj)
        return self.model

    def unpatch_model(self):
        for name, old in self.object_patches_backup.items():
            owner, attr = self._resolve(self.model, name)
            if old is _ABSENT:
                delattr(owner, attr)
            else:
                setattr(owner, attr, old)
        self.object_patches_backup = {}


_ABSENT = object()
