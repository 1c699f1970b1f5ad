-- 0023: memory images of snapshots (internal/snapshot, opt-in on backends
-- that can, gvisor). memory_ref is the backend's reference to the image
-- (JSON of backend.SnapshotRef) and memory_backend the backend that wrote
-- it; both NULL for a files-only snapshot.

ALTER TABLE snapshots ADD COLUMN memory_ref TEXT;
ALTER TABLE snapshots ADD COLUMN memory_backend TEXT;
