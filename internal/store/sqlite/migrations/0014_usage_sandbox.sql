-- 0014: placeholder (reserved for a change in progress).
CREATE TABLE placeholder_0014 (x INTEGER);
DROP TABLE placeholder_0014;
