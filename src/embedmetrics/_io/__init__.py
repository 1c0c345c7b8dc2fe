"""Reading and writing files: TREC runs and qrels (a vectorised reader, Arrow's CSV reader for
plain files, and the line parser as the reference), ids packed as integers, embedding arrays from
``.npy`` / ``.npz`` / ``.pt`` files, progress bars, and the one error type of bad input files. No torch
is imported by the TREC readers."""
