-- 0022: placeholder (reserved for a change in progress).
CREATE TABLE placeholder_0022 (x INTEGER);
DROP TABLE placeholder_0022;
