-- queue.lua: the line of waiters, a linked list inside the hash, so joining, leaving
-- and serving it cost the same however many wait. An entry is a queued writer (its
-- token) or a batch of readers that wait behind the entry before it ('r#<number>',
-- see holds.lua): readers that arrive while the tail is such a batch join it, so
-- writers and batches alternate.
--   q:head, q:tail  the first and the last entry in arrival order
--   wait:<entry>    "<deadline>:<first lease>" the entry's place (ms): it lapses at
--                   the deadline unless a waiter of it comes back; `first lease` is
--                   how long a hold handed to it by another script lasts until it
--                   renews (the place's lifetime, capped by the lease)
--   wn:<entry>      the next entry (absent for the tail)
--   wq:<entry>      when a writer's entry joined the line (ms): a downgrade reports
--                   how long ago the first writer in line queued, so that the reads
--                   of the downgrading client that came after it do not pass it
--                   (downgrade.lua); batches carry their time in their name
--   queue_until     no place lives past this (ms); absent while nobody waits in line
--   layout          LINE_MARK (helpers.lua), written when a line forms and deleted when
--                   it empties: a hash holding a value that long is never stored as a
--                   listpack, whose every field lookup scans the whole hash (a busy
--                   lock's hundred readers would make each HMGET several times
--                   dearer); Redis never turns a hash back into a listpack, so it
--                   stays a hashtable while the key lives
-- A withdrawn entry loses its `wait:` field at once but stays linked until it
-- reaches the head; entries are taken out at the head only (withdrawn or lapsed ones
-- on the way), each once, so the work per operation is constant on average.

-- True for a batch of readers, false for a writer's token.
local function is_batch(entry)
  return sub(entry, 1, 2) == 'r#'
end

-- Whether a live place may exist: new readers wait while one does (writer preference).
local function queued(s)
  return s.head ~= nil and s.queue_until > s.now
end

-- Stores where the queue starts after the head moved.
local function set_head(s, entry)
  s.head = entry
  if entry then
    set(s, 'q:head', entry)
  else
    s.tail, s.queue_until = nil, 0
    del(s, 'q:head')
    del(s, 'q:tail')
    del(s, 'queue_until')
    del(s, 'layout')
  end
end

-- Gives `entry` a place that lapses `ttl` ms from now: a new one at the tail, or
-- its own place refreshed where it is (`linked`; also when it was withdrawn but is
-- still linked: a resent acquire after a withdrawal). `place` is a batch's current
-- place: a batch keeps the latest deadline and the longest first lease of its
-- members. Returns the place's deadline.
local function join_queue(s, entry, linked, ttl, first_lease, place)
  local deadline = s.now + ttl
  if place then
    deadline, first_lease = max(deadline, place.deadline), max(first_lease, place.first_lease)
  end
  set(s, 'wait:' .. entry, int(deadline) .. ':' .. int(first_lease))
  if not linked then
    if not is_batch(entry) then
      set(s, 'wq:' .. entry, int(s.now))
    end
    if s.tail then
      set(s, 'wn:' .. s.tail, entry)
    else
      set_head(s, entry)
      set(s, 'layout', LINE_MARK)
    end
    s.tail = entry
    set(s, 'q:tail', entry)
  end
  if deadline > s.queue_until then
    s.queue_until = deadline
    set(s, 'queue_until', int(deadline))
  end
  s.extended = true
  return deadline
end

-- Withdraws `s.token`'s place (it stays linked until it reaches the head).
local function leave_queue(s)
  del(s, 'wait:' .. s.token)
  s.place = nil
  s.dequeued = true
end

-- Takes the head's entry out of the list; `next` is the entry behind it.
local function unlink_head(s, next)
  del(s, 'wait:' .. s.head)
  del(s, 'wn:' .. s.head)
  if not is_batch(s.head) then
    del(s, 'wq:' .. s.head)
  end
  if s.head == s.token then
    s.place, s.linked = nil, false
  end
  set_head(s, next)
end

-- The first entry with a live place, after taking out the withdrawn and lapsed
-- entries in front of it. Returns it, its first lease and its place's deadline, or
-- nil.
local function first_in_line(s)
  while s.head do
    local names = { 'wait:' .. s.head, 'wn:' .. s.head }
    if is_batch(s.head) then
      names[3] = 'rn:' .. s.head -- its grant needs the count: asked in the same HMGET
    end
    local v = fields(s, names)
    if v[1] then
      local deadline, first_lease = parse_place(v[1])
      if deadline > s.now then
        s.head_next = v[2]
        return s.head, first_lease, deadline
      end
      s.dequeued = true -- its waiters are gone
      if is_batch(s.head) then
        del(s, 'rn:' .. s.head) -- its readers' `rw:` fields now name nothing
      end
    end
    unlink_head(s, v[2])
  end
  return nil
end

-- Takes the first entry (just returned by `first_in_line`) out of the queue.
local function serve_head(s)
  unlink_head(s, s.head_next)
end
