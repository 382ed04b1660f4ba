"""The sections of ``checkpoint_io.py``, one module each: its measuring child (run as
``checkpoint_io.py --child NAME``, in its own process) and the table its figures make.

- ``file_io``: 1 and 2, sync saves and loads on a file:// store;
- ``async_save``: 3, what an async save blocks the caller for;
- ``training``: 3, a training loop with an async save in flight;
- ``s3``: 4, saves and loads on s3:// (loopback moto);
- ``state_dicts``: 5, torch state dicts on file:// and s3://;
- ``shared``: the goals, the raw I/O and the figures they all use."""
