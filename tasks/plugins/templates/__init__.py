"""Templates of ``zoo new-variant`` (:mod:`tasks.plugins.scaffold`): the files of a plugin folder, as
``string.Template``
text (``$name`` placeholders), kept as ``.txt`` so that nothing imports or lints them before they are filled."""
