"""Geometry layer (method.md 7-8): normalisation, surface sampling, FPS, voxel interior fill, procedural
shapes and the training-shape dataset.

Modules: :mod:`.normalize`, :mod:`.sampling`, :mod:`.inside`, :mod:`.interior`, :mod:`.shapes`, :mod:`.dataset`.
Import from the submodules (kept lazy so ``import physskin_gs.geometry`` stays cheap).
"""
