#!lua
-- The first part of a script assembled from several files that may create keys. No
-- allow-oom: with memory full Redis refuses such a script before it runs (without a
-- shebang it would be refused only at its first denyoom command, if no write came first).
