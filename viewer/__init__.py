"""physskin_gs_viewer: the viser browser viewer for ``physskin-gs animate`` (installed as ``physskin_gs_viewer``).

Modules: :mod:`.app` (``ViewerApp``, ``run_viewer``: server, GUI, handles, display loop), :mod:`.sim` (the
simulation worker thread, latest-frame mailbox and display-side deformation), :mod:`.splats` (splat packing for
viser: numpy reference and the torch ``SplatPacker``; picking, colour maps), :mod:`.render_server` (server-rendered mode), :mod:`.recorder` (frame-sequence recording),
:mod:`.camera` (viser camera -> viewmat/K), :mod:`.testing` (fakes, websocket client, headless Chromium) and
:mod:`.screenshots` (scripted browser screenshots). ``physskin_gs`` itself never imports viser.
"""
