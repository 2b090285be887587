"""Exception types shared by every layer of physskin_gs.

The CLI turns any :class:`PhysSkinError` into ``error: <message>`` on stderr and exit code 2.
"""

from __future__ import annotations


class PhysSkinError(Exception):
    """Base class for every error physskin_gs raises on purpose (bad input, bad options)."""


class SceneFormatError(PhysSkinError, ValueError):
    """A file is not a readable Gaussian scene (or mesh). The message names the file and what is wrong."""


class CheckpointError(PhysSkinError, ValueError):
    """A model checkpoint is missing, corrupt, or was not written by physskin_gs."""


class OptionError(PhysSkinError, ValueError):
    """A command-line or API option has a value that cannot work (for example an empty selection box)."""


class OutputError(PhysSkinError):
    """An output could not be written, or what was written is missing or incomplete (the message says which)."""
