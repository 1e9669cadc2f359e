"""Helpers the tests share: starting ``edgepipe`` in a child process (:mod:`.cli_process`,
:mod:`.stopping`), generated media and models (:mod:`.colour_clips`, :mod:`.onnx_builders`), full
disks (:mod:`.disks`), a served pipeline and its viewers (:mod:`.viewing`), and the documents'
commands (:mod:`.readme_commands`, :mod:`.readme_checks`). No test lives here."""
