#!lua flags=allow-oom
-- The first part of a script assembled from several files that must run with memory
-- full: what is held must stay renewable and releasable then, so such a script must
-- never create a key (it only changes or removes existing entries).
