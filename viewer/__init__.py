"""physskin_gs_viewer: the viser browser viewer for ``physskin-gs animate`` (installed as ``physskin_gs_viewer``)."""
