"""physskin_gs_viewer: the viser browser viewer for ``physskin-gs animate`` (installed as ``physskin_gs_viewer``).

Modules: :mod:`.app` (``ViewerApp``, ``run_viewer``: server, lifecycle, preparation and activation of an
AnimatedScene, errors, display mode; composes the parts below), :mod:`.panel` (the GUI panel and its callbacks),
:mod:`.display` (splat nodes, the display thread, colours, stats), :mod:`.interaction` (handle gizmos,
click-to-grab, click dispatch), :mod:`.recording` (live recording control), :mod:`.selection` (scene facts, box
gizmo, component pick), :mod:`.switching` (re-preparation on a new skinning source, selection or up axis),
:mod:`.constants` (shared labels and factors), :mod:`.sim` (the simulation worker thread, latest-frame mailbox and
display-side deformation), :mod:`.splats` (splat packing for viser: numpy reference and the torch
``SplatPacker``; picking, colour maps), :mod:`.render_server` (server-rendered mode), :mod:`.recorder`
(frame-sequence writer), :mod:`.camera` (viser camera -> viewmat/K), :mod:`.testing` (fakes, websocket client,
headless Chromium) and :mod:`.screenshots` (scripted browser screenshots). ``physskin_gs`` itself never imports
viser.
"""
