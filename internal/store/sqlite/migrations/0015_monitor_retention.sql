-- 0015: placeholder (reserved for a change in progress).
CREATE TABLE placeholder_0015 (x INTEGER);
DROP TABLE placeholder_0015;
