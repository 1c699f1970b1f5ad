-- 0016: placeholder (reserved for a change in progress).
CREATE TABLE placeholder_0016 (x INTEGER);
DROP TABLE placeholder_0016;
