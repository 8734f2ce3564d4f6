"""Reading: the layouts cases arrive in (Synapse slices and volumes, ACDC, NIfTI folders in the Decathlon,
nnU-Net raw and images/ + labels/ layouts, the generated phantoms) and the in-memory
:class:`~tasks.medseg.reading.volume.Volume`."""
