-- 0021: placeholder (reserved for a change in progress).
CREATE TABLE placeholder_0021 (x INTEGER);
DROP TABLE placeholder_0021;
