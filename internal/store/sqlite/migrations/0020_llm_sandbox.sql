-- 0020: placeholder (reserved for a change in progress).
CREATE TABLE placeholder_0020 (x INTEGER);
DROP TABLE placeholder_0020;
