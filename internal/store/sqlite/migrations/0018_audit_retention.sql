-- 0018: placeholder (reserved for a change in progress).
CREATE TABLE placeholder_0018 (x INTEGER);
DROP TABLE placeholder_0018;
