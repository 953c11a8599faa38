"""The network zoo of issue #39: networks built offline and reproducibly, split once into a
``tune`` and a ``held_out`` half (see ``networks.py`` and ``README.md``)."""
