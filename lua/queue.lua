-- queue.lua: the writers' queue, a linked list inside the hash, so joining, leaving
-- and serving it cost the same however many writers wait:
--   q:head, q:tail  tokens of the first and the last place in arrival order
--   wait:<token>    "<deadline>:<first lease>" a queued writer's place (ms): it lapses
--                   at the deadline unless the waiter comes back; `first lease` is how
--                   long a hold handed to it by another script's release lasts
--                   until it renews (the place's lifetime, capped by its lease)
--   wn:<token>      the token of the next place (absent for the tail)
--   queue_until     no place lives past this (ms); absent while nobody queues
-- A withdrawn place loses its `wait:` field at once but stays linked until it
-- reaches the head; places are taken out at the head only (withdrawn or lapsed ones
-- on the way), each once, so the work per operation is constant on average.

-- "<deadline>:<first lease>" as two numbers.
local function parse_place(value)
  local colon = find(value, ':', 1, true)
  return tonumber(sub(value, 1, colon - 1)), tonumber(sub(value, colon + 1))
end

-- Whether a live place may exist: readers wait while one does (writer preference).
local function queued(s)
  return s.head ~= nil and s.queue_until > s.now
end

-- Stores where the queue starts after the head moved.
local function set_head(s, token)
  s.head = token
  if token then
    set(s, 'q:head', token)
  else
    s.tail, s.queue_until = nil, 0
    del(s, 'q:head')
    del(s, 'q:tail')
    del(s, 'queue_until')
  end
end

-- Gives `s.token` a place that lapses `ttl` ms from now: a new one at the tail, or
-- its own place refreshed where it is (also when it was withdrawn but is still
-- linked: a resent acquire after a withdrawal).
local function join_queue(s, ttl, first_lease)
  local token = s.token
  local deadline = s.now + ttl
  set(s, 'wait:' .. token, int(deadline) .. ':' .. int(first_lease))
  if not s.linked then
    if s.tail then
      set(s, 'wn:' .. s.tail, token)
    else
      set_head(s, token)
    end
    s.tail, s.linked = token, true
    set(s, 'q:tail', token)
  end
  s.place = deadline
  if deadline > s.queue_until then
    s.queue_until = deadline
    set(s, 'queue_until', int(deadline))
  end
  s.extended = true
end

-- Withdraws `s.token`'s place (it stays linked until it reaches the head).
local function leave_queue(s)
  del(s, 'wait:' .. s.token)
  s.place = nil
  s.dequeued = true
end

-- Takes the head's place out of the list; `next` is the place behind it.
local function unlink_head(s, next)
  del(s, 'wait:' .. s.head)
  del(s, 'wn:' .. s.head)
  if s.head == s.token then
    s.place, s.linked = nil, false
  end
  set_head(s, next)
end

-- The first queued writer with a live place, after taking out the withdrawn and
-- lapsed places in front of it. Returns its token, first lease and the place's
-- deadline, or nil.
local function first_writer(s)
  while s.head do
    local v = fields(s, { 'wait:' .. s.head, 'wn:' .. s.head })
    if v[1] then
      local deadline, first_lease = parse_place(v[1])
      if deadline > s.now then
        s.head_next = v[2]
        return s.head, first_lease, deadline
      end
      s.dequeued = true -- its waiter is gone
    end
    unlink_head(s, v[2])
  end
  return nil
end

-- Takes the first writer (just returned by `first_writer`) out of the queue.
local function serve_head(s)
  unlink_head(s, s.head_next)
end
