-- fast_path.lua: the hash layout's fast paths. The common operations on a lock that
-- has only plain holds of ours (a read acquire and release, upgradable or not, a
-- write acquire on a free lock and its release with nobody waiting, a renewal), the
-- two a busy lock's readers make most (joining the line behind a writer, leaving
-- the batch they were let in with) and the two its writers make (joining the line
-- behind our holders, and the release that hands the lock to the writer first in
-- line) decide from the fields they need, taken straight from one HMGET (two for the
-- batches and the hand-over) without building tables, and write with one HSET or
-- HDEL (both for a hand-over). They come to exactly what the full way (`load`, the operation,
-- `settle`) would: the same reply, fields, expiry and messages. Anything
-- else goes the full way in the same call: a place in line or a batch of readers, an
-- upgradable reader, an original client's stamp, an expired hold to clean up, the
-- token's own earlier hold (a resent command).
--
-- What they rely on, which every script keeps (the model checker asserts it in every
-- state it reaches, src/protocol/engine/hash.rs `fast_paths_may_skip`):
--   1. nothing of the line without `q:head`: no `wait:`/`wn:`/`wq:` field, `q:tail`,
--      `queue_until` or `layout` (and no batch of readers) while it is absent, and
--      `q:tail` with it while it is present;
--   2. nothing of an upgradable hold without `u:owner`: no `u:until`, `u:upgrade`,
--      `u:others`;
--   3. `readers` and `readers_until` exist together, no counted hold (an `r:`
--      field above `readers_gone`, a batch's grant) ends after `readers_until`,
--      and `shares` exists only while a batch's grant counts;
--   4. our writer's `write` stamp equals `wstamp`; a `write` field that does not
--      is an original writer's (and so is one without `w:owner`).
-- HMGET gives false for a missing field. Each returns the reply, or nil and the
-- server's clock to go the full way.
local fast = {}

-- Runs `operation`'s fast path (by the name of its file), if it has one: returns
-- its reply, or nil and the server's clock if it read it (the full way then reads
-- the lock itself, without asking the clock again).
function layout.fast_path(operation, argv)
  local path = fast[operation]
  if path then
    return path(argv)
  end
end

-- A plain read acquire by a token that holds nothing yet and waits nowhere: granted
-- on a lock without writer, line or upgradable reader, or (`fast.join`) put in line
-- behind our writer or a queued writer (ARGV as acquire_read.lua).
function fast.acquire_read(argv)
  local token, upgradable = argv[4], argv[7] == '1'
  local now, now_us = server_time()
  local mine = 'r:' .. token
  local v = redis.call('HMGET', KEY, mine, 'rw:' .. token, 'w:owner', 'q:head', 'u:owner',
    'write', 'orig:read', 'read', 'rstamp', 'readers', 'readers_until', 'q:tail', 'fence')
  local n, last = tonumber(v[10]) or 0, tonumber(v[11]) or 0
  if v[1] or v[2] or v[5] or v[7] or (v[8] and v[8] ~= v[9]) or (n > 0 and last <= now) then
    return nil, now, now_us -- its own fields, an upgradable reader, an original reader,
    -- or readers that all expired (the full way sweeps them)
  end
  if v[3] or v[4] then
    if upgradable then
      return nil, now, now_us -- refused: the full way (an upgradable reader waits apart)
    end
    return fast.join(argv, now, now_us, v, n, last), now, now_us
  end
  if v[6] then
    return nil, now, now_us -- an original writer's stamp
  end
  local deadline = now + tonumber(argv[5])
  local others = last -- no other reader's deadline is later
  local until_text, stamp = int(deadline), int(now)
  if deadline >= last then
    last = deadline
    redis.call('HSET', KEY, mine, until_text, 'readers', n + 1, 'readers_until', until_text,
      'read', stamp, 'rstamp', stamp)
  else
    redis.call('HSET', KEY, mine, until_text, 'readers', n + 1, 'read', stamp, 'rstamp', stamp)
  end
  if upgradable then
    -- The upgradable hold, the same deadline as its read hold.
    if n > 0 then
      redis.call('HSET', KEY, 'u:owner', token, 'u:until', until_text, 'u:others', int(others))
    else
      redis.call('HSET', KEY, 'u:owner', token, 'u:until', until_text)
    end
  end
  keep_alive(last - now, n == 0 and not v[13])
  return { 1, 0 }
end

-- A plain reader that must wait under writer preference joins the line: the batch
-- of readers at its tail, or a new one there (holds.lua `batches.join`). Only behind
-- our live writer, or behind a live writer's place at the head of the line while
-- readers hold; `v`: acquire_read's fields, `n` and `last` the readers' count and
-- latest deadline. Returns the refusal, or nil for the full way.
function fast.join(argv, now, now_us, v, n, last)
  local token, head, tail = argv[4], v[4], v[12]
  local ttl = tonumber(argv[8]) or 0
  if argv[6] ~= '1' or ttl <= 0 or head == token or tail == token then
    return nil
  end
  local b = redis.call('HMGET', KEY, 'w:until', 'wstamp', 'queue_until', 'wait:' .. token,
    'wn:' .. token, 'wait:' .. (head or ''), 'wait:' .. (tail or ''), 'rn:' .. (tail or ''),
    'rseq')
  if b[4] or b[5] then
    return nil -- a place of its own in line
  end
  local writer_until, queue_until = tonumber(b[1]) or 0, tonumber(b[3]) or 0
  if v[3] then
    if writer_until <= now or not v[6] or v[6] ~= b[2] then
      return nil -- our writer expired, or an original writer's stamp
    end
  elseif v[6] or n == 0 or sub(head, 1, 2) == 'r#' then
    return nil -- the line may move: the full way serves it
  end
  -- The head's place must be live (the full way would take out a lapsed one).
  local first = head and queue_until > now
  if first and (not b[6] or parse_place(b[6]) <= now) then
    return nil
  end
  if not first and not v[3] then
    return nil -- the line lapsed: the reader may go
  end
  local lease = tonumber(argv[5])
  local first_lease, deadline = min(ttl, lease), now + ttl
  local batch, count
  local writes = {}
  if tail and sub(tail, 1, 2) == 'r#' and b[7] then
    local place_deadline, place_lease = parse_place(b[7])
    if place_deadline > now then
      batch, count = tail, tonumber(b[8]) or 0
      deadline, first_lease = max(deadline, place_deadline), max(first_lease, place_lease)
    end
  end
  if not batch then
    local number = max((tonumber(b[9]) or 0) + 1, now_us)
    batch, count = 'r#' .. int(number), 0
    writes = { 'rseq', int(number) }
    fast.link(writes, tail, batch)
  end
  writes[#writes + 1], writes[#writes + 2] = 'rw:' .. token, batch .. ':' .. int(now + ttl)
  writes[#writes + 1], writes[#writes + 2] = 'rn:' .. batch, count + 1
  writes[#writes + 1], writes[#writes + 2] = 'wait:' .. batch,
    int(deadline) .. ':' .. int(first_lease)
  if deadline > queue_until then
    queue_until = deadline
    writes[#writes + 1], writes[#writes + 2] = 'queue_until', int(deadline)
  end
  redis.call('HSET', KEY, unpack(writes))
  local holds = 0
  if v[3] then
    holds = writer_until
  end
  if n > 0 then
    holds = max(holds, last)
  end
  keep_alive(max(holds, queue_until) - now)
  if first and not v[3] then
    return { 0, max(queue_until - now, 1), 0, batch }
  end
  return { 0, max(holds - now, 1), 0, batch }
end

-- Adds to `writes` (field-value pairs for one HSET) the write hold of `token` until
-- `deadline` with the fencing token after `fence` (the field's value; holds.lua
-- `grant_write`), and returns that token.
function fast.grant_write(writes, fence, token, deadline, now, now_us)
  local granted, stamp, n = max((tonumber(fence) or 0) + 1, now_us), int(now), #writes
  writes[n + 1], writes[n + 2] = 'fence', int(granted)
  writes[n + 3], writes[n + 4], writes[n + 5], writes[n + 6] = 'w:owner', token, 'w:until',
    int(deadline)
  writes[n + 7], writes[n + 8], writes[n + 9], writes[n + 10] = 'write', stamp, 'wstamp', stamp
  return granted
end

-- Adds to `writes` (field-value pairs for one HSET) what puts `entry` at the tail of
-- the line (queue.lua `join_queue`): behind `tail`, or first in a new line.
function fast.link(writes, tail, entry)
  local n = #writes
  writes[n + 1], writes[n + 2] = 'q:tail', entry
  if tail then
    writes[n + 3], writes[n + 4] = 'wn:' .. tail, entry
  else
    writes[n + 3], writes[n + 4] = 'q:head', entry
    writes[n + 5], writes[n + 6] = 'layout', LINE_MARK
  end
end

-- A write acquire by a token that holds nothing and waits nowhere: granted on a free
-- lock nobody waits for, or (`fast.queue_writer`) put at the tail of the line behind
-- our live writer or our live readers (ARGV as acquire_write.lua).
function fast.acquire_write(argv)
  if argv[7] == '1' then
    return nil -- an upgrade
  end
  local token = argv[4]
  local now, now_us = server_time()
  local v = redis.call('HMGET', KEY, 'w:owner', 'q:head', 'u:owner', 'readers', 'write', 'read',
    'orig:read', 'r:' .. token, 'rw:' .. token, 'fence')
  if v[1] == token or v[3] or v[7] or v[8] or v[9] then
    return nil, now, now_us -- the token's own fields, an upgradable or original reader
  end
  if v[1] or v[2] or v[4] or v[5] or v[6] then
    return fast.queue_writer(argv, now, now_us, v), now, now_us
  end
  local deadline, writes = now + tonumber(argv[5]), {}
  local fence = fast.grant_write(writes, v[10], token, deadline, now, now_us)
  redis.call('HSET', KEY, unpack(writes))
  keep_alive(deadline - now, not v[10])
  return { 1, fence }
end

-- A writer refused behind our live writer, or behind our live readers with no batch
-- of readers at the head of the line (which the full way may let in), takes a place
-- at the tail of the line (queue.lua `join_queue`); `v`: acquire_write's fields, to
-- which one more HMGET adds what the line and the holds' ends need. Returns the
-- refusal, or nil for the full way.
function fast.queue_writer(argv, now, now_us, v)
  local token, ttl = argv[4], tonumber(argv[6])
  if ttl <= 0 then
    return nil -- try_write
  end
  local more = redis.call('HMGET', KEY, 'w:until', 'wstamp', 'rstamp', 'readers_until', 'q:tail',
    'queue_until', 'wait:' .. token, 'wn:' .. token)
  for i = 1, 8 do
    v[10 + i] = more[i]
  end
  local head, tail = v[2], v[15]
  if v[17] or v[18] or head == token or tail == token then
    return nil -- a place of its own
  end
  if (v[5] and v[5] ~= v[12]) or (v[6] and v[6] ~= v[13]) then
    return nil -- an original client's stamp
  end
  local n, holds = tonumber(v[4]) or 0, nil
  if v[1] then
    holds = tonumber(v[11]) or 0
    if n > 0 or v[6] or not v[5] or holds <= now then
      return nil -- readers beside the writer, a stale read stamp, or the writer expired
    end
  else
    holds = tonumber(v[14]) or 0
    if v[5] or n == 0 or holds <= now or (head and sub(head, 1, 2) == 'r#') then
      return nil
    end
  end
  local deadline = now + ttl
  local writes = { 'wait:' .. token, int(deadline) .. ':' .. int(min(ttl, tonumber(argv[5]))),
    'wq:' .. token, int(now) }
  fast.link(writes, tail, token)
  local queue_until = tonumber(v[16]) or 0
  if deadline > queue_until then
    queue_until = deadline
    writes[#writes + 1], writes[#writes + 2] = 'queue_until', int(deadline)
  end
  redis.call('HSET', KEY, unpack(writes))
  keep_alive(max(holds, queue_until) - now)
  if not v[1] then
    publish('w') -- readers hold: call them back (acquire_write.lua)
  end
  return { 0, max(holds - now, 1), max(tonumber(v[10]) or 0, now_us) }
end

-- The fields a release or a renewal of `token` decides from, in this order.
function fast.own_hold(token)
  return redis.call('HMGET', KEY, 'r:' .. token, 'w:owner', 'w:until', 'rw:' .. token,
    'u:owner', 'orig:read', 'read', 'rstamp', 'write', 'wstamp', 'readers', 'readers_until',
    'readers_gone', 'q:head', 'queue_until', 'wait:' .. token, 'u:upgrade', 'u:wanted')
end

-- When the last place in line in `v` (own_hold's fields) lapses; 0 without a line.
function fast.queue_until(v)
  if v[14] then
    return tonumber(v[15]) or 0
  end
  return 0
end

-- True when the line in `v` (own_hold's fields) keeps readers' scripts from going
-- the fast way: it has a head, and either the lock frees with this script (`last`:
-- the last reader leaves, or the writer does) so the head may go, or the head is a
-- batch of readers, which the full way lets in.
function fast.line_in_the_way(v, last)
  return v[14] and (last or sub(v[14], 1, 2) == 'r#')
end

-- `token`'s counted read hold in `v` (own_hold's fields) on a lock with no writer,
-- upgradable reader or original client, and no place of the token's in line: its
-- own `r:` field, or (`releasing`) its share of a granted batch of readers (its `rw:`
-- field; the batch's deadline and count come from a second HMGET), or its own
-- upgradable hold when no upgrade waits and no other upgradable reader asked. Returns the
-- hold's deadline, the readers' count and latest deadline, and for a share the batch,
-- its count and `shares`. Nil for anything else (the full way cleans up what expired).
function fast.plain_reader(v, now, token, releasing)
  if v[2] or v[6] or v[9] or v[16] or (v[7] and v[7] ~= v[8]) then
    return nil
  end
  if v[5] and not (releasing and v[5] == token and v[1] and not (v[17] or v[18])) then
    return nil
  end
  local n, last, gone = tonumber(v[11]) or 0, tonumber(v[12]) or 0, tonumber(v[13]) or 0
  if n == 0 or last <= now then
    return nil
  end
  if v[1] and not v[4] then
    local mine = tonumber(v[1])
    if mine > gone then
      return mine, n, last
    end
  elseif v[4] and not v[1] and releasing then
    local batch, own = parse_place(v[4])
    local b = redis.call('HMGET', KEY, 'rg:' .. batch, 'rn:' .. batch, 'shares')
    local granted = tonumber(b[1])
    if granted and granted > gone then
      -- Its share ends with the grant, or with its own place if that is earlier.
      return min(granted, own), n, last, batch, tonumber(b[2]) or 1, tonumber(b[3]) or 1
    end
  end
  return nil
end

-- True when `v` (own_hold's fields) has `token`'s live write hold, with no reader
-- and no original client beside it.
function fast.plain_writer(v, token, now)
  return v[2] == token and (tonumber(v[3]) or 0) > now and not (v[1] or v[4] or v[5] or v[6] or v[7]
    or v[11] or v[16]) and v[9] and v[9] == v[10]
end

-- A reader that holds by its share of `batch` (`count` readers) leaves it, the
-- counted shares (`shares`) and the readers (`n`): the batch goes with its last
-- reader, the summaries and the stamp with the last reader.
function fast.leave_batch(token, batch, count, shares, n)
  local deleted, written = { 'rw:' .. token }, {}
  if count > 1 then
    written[1], written[2] = 'rn:' .. batch, count - 1
  else
    deleted[2], deleted[3] = 'rn:' .. batch, 'rg:' .. batch
  end
  if shares > 1 then
    written[#written + 1], written[#written + 2] = 'shares', shares - 1
  else
    deleted[#deleted + 1] = 'shares'
  end
  if n > 1 then
    written[#written + 1], written[#written + 2] = 'readers', n - 1
  else
    for _, field in ipairs({ 'readers', 'readers_until', 'read', 'rstamp' }) do
      deleted[#deleted + 1] = field
    end
  end
  redis.call('HDEL', KEY, unpack(deleted))
  if #written > 0 then
    redis.call('HSET', KEY, unpack(written))
  end
end

-- The upgradable reader leaves the readers (`n`), its upgradable hold with it
-- (nobody waits for that hold: no upgrade, no other upgradable reader refused).
function fast.leave_upgradable(token, n)
  if n > 1 then
    redis.call('HDEL', KEY, 'r:' .. token, 'u:owner', 'u:until', 'u:others')
    redis.call('HSET', KEY, 'readers', n - 1)
  else
    redis.call('HDEL', KEY, 'r:' .. token, 'u:owner', 'u:until', 'u:others', 'readers',
      'readers_until', 'read', 'rstamp')
  end
end

-- A release of a plain read hold, or of the write hold with nobody in line
-- (ARGV as release.lua).
function fast.release(argv)
  local token = argv[4]
  local now, now_us = server_time()
  local v = fast.own_hold(token)
  local mine, n, _, batch, count, shares = fast.plain_reader(v, now, token, true)
  if mine and not fast.line_in_the_way(v, n == 1) then
    if batch then
      fast.leave_batch(token, batch, count, shares, n)
    elseif v[5] then
      fast.leave_upgradable(token, n)
    elseif n > 1 then
      redis.call('HDEL', KEY, 'r:' .. token)
      redis.call('HSET', KEY, 'readers', n - 1)
    else
      redis.call('HDEL', KEY, 'r:' .. token, 'readers', 'readers_until', 'read', 'rstamp')
    end
    if mine > now then
      return 1
    end
    return 0
  end
  if fast.plain_writer(v, token, now) then
    if not v[14] then
      redis.call('HDEL', KEY, 'w:owner', 'w:until', 'write', 'wstamp')
      publish('*')
      return 1
    end
    return fast.hand_over(v, now, now_us), now, now_us
  end
  return nil, now, now_us
end

-- Our writer (`v`: own_hold's fields, of a plain writer) leaves a lock whose line
-- starts with a writer's live place: the lock goes to that writer for its first
-- lease, cut to its place's end (holds.lua `settle`), and the line moves up one.
-- Returns the release's reply, or nil for the full way.
function fast.hand_over(v, now, now_us)
  local head = v[14]
  if sub(head, 1, 2) == 'r#' then
    return nil -- a batch of readers: the full way grants it
  end
  local b = redis.call('HMGET', KEY, 'wait:' .. head, 'wn:' .. head, 'fence')
  if not b[1] then
    return nil -- a withdrawn place: the full way takes it out
  end
  local deadline, first_lease = parse_place(b[1])
  if deadline <= now then
    return nil -- a lapsed place, likewise
  end
  local until_, queue_until, writes = now + min(first_lease, deadline - now), 0, {}
  if b[2] then
    redis.call('HDEL', KEY, 'wait:' .. head, 'wn:' .. head, 'wq:' .. head)
    writes = { 'q:head', b[2] }
    queue_until = tonumber(v[15]) or 0
  else
    redis.call('HDEL', KEY, 'wait:' .. head, 'wq:' .. head, 'q:head', 'q:tail', 'queue_until',
      'layout')
  end
  local fence = fast.grant_write(writes, b[3], head, until_, now, now_us)
  redis.call('HSET', KEY, unpack(writes))
  keep_alive(max(until_, queue_until) - now)
  publish(head .. ':' .. int(fence))
  return 1
end

-- A renewal of a plain read hold on a lock nobody waits for, or of the write hold
-- (ARGV as renew.lua).
function fast.renew(argv)
  local token, lease = argv[4], tonumber(argv[5])
  local now, now_us = server_time()
  local v = fast.own_hold(token)
  if argv[6] == 'write' then
    if not fast.plain_writer(v, token, now) then
      return nil, now, now_us
    end
    local deadline = max(now + lease, tonumber(v[3]))
    local stamp = int(now)
    redis.call('HSET', KEY, 'w:owner', token, 'w:until', int(deadline), 'write', stamp,
      'wstamp', stamp)
    keep_alive(max(deadline, fast.queue_until(v)) - now)
    return 1
  end
  local mine, _, last = fast.plain_reader(v, now, token, false)
  -- With a line, the full way renews, and says that someone waits.
  if not mine or mine <= now or v[14] then
    return nil, now, now_us
  end
  local deadline = max(now + lease, mine)
  local until_text, stamp = int(deadline), int(now)
  if deadline > last then
    last = deadline
    redis.call('HSET', KEY, 'r:' .. token, until_text, 'readers_until', until_text, 'read',
      stamp, 'rstamp', stamp)
  else
    redis.call('HSET', KEY, 'r:' .. token, until_text, 'read', stamp, 'rstamp', stamp)
  end
  keep_alive(max(last, fast.queue_until(v)) - now)
  return 1
end
