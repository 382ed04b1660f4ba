"""Object-store layer: one small protocol over URI strings (file://, s3://, gs://)."""
