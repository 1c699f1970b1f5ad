-- 0017: placeholder (reserved for a change in progress).
CREATE TABLE placeholder_0017 (x INTEGER);
DROP TABLE placeholder_0017;
