-- Refreshes a consumer's claim on entries it holds (see `refresh_claims`
-- in common.lua for what that does and which ids it passes over). A read
-- that takes idle entries does the same first for the ids its caller
-- holds (read.lua).
--
-- KEYS: 1 stream. ARGV: 1 group, 2 consumer, 3.. ids.
-- Reply: how many claims were refreshed.
local S = KEYS[1]
local G, C = ARGV[1], ARGV[2]
check(S, G, {})
return refresh_claims(S, G, C, distinct_ids(3))
