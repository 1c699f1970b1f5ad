-- 0019: placeholder (reserved for a change in progress).
CREATE TABLE placeholder_0019 (x INTEGER);
DROP TABLE placeholder_0019;
