-- holds.lua: reading the lock, granting and ending holds, and what every script
-- does last (`settle`). The lock's whole state is one hash, KEYS[1]:
--   w:owner, w:until  the writer's token and lease deadline (ms)
--   r:<token>         one reader's lease deadline (ms)
--   readers           how many `r:` fields count (absent: none)
--   readers_until     no counted reader's deadline is later (absent with `readers`)
--   readers_gone      an `r:` field with a deadline up to this is what a reader that
--                     never released left behind: it holds nothing and is not counted
--   u:owner, u:until  the upgradable reader's token and lease deadline (ms): one of
--                     the counted readers (its `r:` field has the same deadline) that
--                     excludes other upgradable readers and may turn into the writer
--   u:upgrade         "<deadline>:<first lease>" while that reader waits to upgrade:
--                     new readers wait behind it as behind a queued writer; the
--                     deadline lapses unless its waiter comes back (like a queue place)
--   u:others          while an upgradable reader holds: no other counted reader's
--                     deadline is later (so once it has passed, the upgrade need not
--                     wait for readers that vanished without releasing)
--   u:wanted          '1': an upgradable acquire was refused because another one
--                     held, so the end of that hold is announced ('u')
--   fence             last fencing token issued: max(fence + 1, server time in
--                     microseconds), so tokens keep rising after the key expired
--   rw:<token>        "<batch>:<deadline>": the batch a reader waits in (writer
--                     preference: readers that find writers ahead wait in line, in
--                     batches), until its share of the batch's grant becomes its own
--                     `r:` field, and the deadline of its own place in it (ms; its
--                     last attempt plus the place's lifetime)
--   rn:<batch>        how many readers wait in the batch, or (once granted) hold by
--                     it without an `r:` field of their own yet
--   rg:<batch>        the deadline of a granted batch's readers (ms): they are
--                     counted in `readers`; each one's hold ends there, or at its own
--                     place's deadline if that is earlier, unless it renews (its next
--                     script turns its share into an `r:` field)
--   shares            how many counted readers hold by a batch's grant without an
--                     `r:` field of their own yet (absent: none)
--   rseq              the last batch number: max(rseq + 1, server time in µs), so
--                     a batch's name is never used twice, also after the key expired
--   the line of writers and reader batches (queue.lua) and the layout's stamps
--   (hash_layout.lua)
-- Scripts read only named fields (HMGET), never the whole hash, so no operation
-- costs more when more readers hold or more writers wait. Readers are judged by
-- their count and latest deadline: once `readers_until` has passed, every counted
-- reader has expired, and the count starts again from zero.

-- Deletes the `r:` fields that readers which never released left behind, and the
-- grants of batches whose readers all expired, as far as one bounded HSCAN each
-- (COUNT 100: a small hash is scanned whole) finds them (rare: only when every counted reader has expired). A dead batch
-- reader's `rw:` field stays until it would act or the key expires: it names a
-- batch that no longer exists, which counts as nothing.
local function sweep_leftovers(s)
  local found = redis.call('HSCAN', KEY, 0, 'MATCH', 'r:*', 'COUNT', 100)[2]
  for i = 1, #found, 2 do
    if tonumber(found[i + 1]) <= s.gone then
      del(s, found[i])
    end
  end
  found = redis.call('HSCAN', KEY, 0, 'MATCH', 'rg:*', 'COUNT', 100)[2]
  for i = 1, #found, 2 do
    if tonumber(found[i + 1]) <= s.gone then
      del(s, found[i])
      del(s, 'rn:' .. sub(found[i], 4))
    end
  end
end

-- Readers waiting in line, in batches (one table: a function library's chunk may
-- hold no more than 60 locals): `leave`, `join`, `grant`, `serve`, `drop_lapsed`
-- and the count of their shares below.
local batches = {}

-- `token`'s reader leaves `batch` (`granted`: it held by the batch's grant): the
-- batch counts one reader less, and goes when none is left (a waiting batch's place
-- is then withdrawn).
function batches.drop_member(s, token, batch, granted)
  del(s, 'rw:' .. token)
  local n = (tonumber(fields(s, { 'rn:' .. batch })[1]) or 1) - 1
  if n > 0 then
    set(s, 'rn:' .. batch, n)
  else
    del(s, 'rn:' .. batch)
    if granted then
      del(s, 'rg:' .. batch)
    else
      del(s, 'wait:' .. batch)
      s.dequeued = true
    end
  end
end

-- `shares` moves by `n`.
function batches.add_shares(s, n)
  s.shares = s.shares + n
  if s.shares > 0 then
    set(s, 'shares', s.shares)
  else
    del(s, 'shares')
  end
end

-- No share counts any more: every counted reader's hold ended.
function batches.forget(s)
  if s.shares > 0 then
    s.shares = 0
    del(s, 'shares')
  end
end

-- The caller's reader leaves its batch (`granted`: it held by the batch's grant,
-- counted while `mine` is set).
function batches.leave(s, batch, granted)
  batches.drop_member(s, s.token, batch, granted)
  if granted then
    s.grouped = nil
    if s.mine then
      batches.add_shares(s, -1)
    end
  else
    s.batch, s.batch_place, s.member_until = nil, nil, nil
  end
end

-- The pending upgrade ends without the write hold (withdrawn, lapsed, or its reader
-- gone): readers that waited behind it may go.
local function end_upgrade(s)
  if s.upgrade or s.h['u:upgrade'] then
    del(s, 'u:upgrade')
    s.upgrade, s.upgrade_ended = nil, true
  end
end

-- The upgradable hold ends without becoming the write hold (released, downgraded,
-- expired), and its pending upgrade with it: waiting upgradable readers may go.
local function end_upgradable(s)
  del(s, 'u:owner')
  del(s, 'u:until')
  del(s, 'u:others')
  s.upgradable, s.upgradable_until = nil, nil
  s.upgradable_ended = true
  end_upgrade(s)
end

-- The readers of batch `batch` (just returned by `first_in_line`: its first lease
-- and its place's deadline) all hold from now, in one step whatever their number:
-- counted as readers until the batch's deadline, the first lease from now but never
-- past the place (a batch whose readers died blocks nobody longer than its place
-- would have). Each reader learns it from the batch's message, or finds it at its
-- next script, which turns its share into its own `r:` field.
function batches.grant(s, batch, first_lease, place_deadline)
  local n = tonumber(fields(s, { 'rn:' .. batch })[1]) or 0
  serve_head(s)
  if n == 0 then
    return
  end
  local deadline = min(s.now + first_lease, place_deadline)
  s.nreaders = s.nreaders + n
  set(s, 'readers', s.nreaders)
  if deadline > s.readers_until then
    s.readers_until = deadline
    set(s, 'readers_until', int(deadline))
  end
  if s.upgradable and deadline > s.others_until then
    s.others_until = deadline
    set(s, 'u:others', int(deadline))
  end
  set(s, 'rg:' .. batch, int(deadline))
  batches.add_shares(s, n)
  layout.stamp_read(s)
  s.extended, s.granted = true, batch
  if s.batch == batch then
    s.grouped, s.mine = batch, min(deadline, s.member_until or deadline)
    s.batch, s.batch_place, s.member_until = nil, nil, nil
  end
end

-- Lets in the batch of readers first in line when nothing keeps readers out: no
-- writer (ours or an original client's) and no pending upgrade. Looks at the line
-- only when its head is a batch, or the lock is free, or an entry left it (so a
-- reader's script on a lock whose next writer waits for the readers costs nothing).
function batches.serve(s)
  if not s.head or s.writer or s.original_writer_until or s.upgrade then
    return
  end
  local free = s.nreaders == 0 and not s.original_reader_until
  if not (is_batch(s.head) or free or s.dequeued) then
    return
  end
  local first, first_lease, deadline = first_in_line(s)
  if first and is_batch(first) then
    batches.grant(s, first, first_lease, deadline)
  end
end

-- The fields every script reads after the token's own three (`load`): the
-- summaries above and the queue's ends, then the layout's. Built once (in the
-- function library, once per load of the library).
local LOCK_FIELDS = { 'w:owner', 'w:until', 'readers', 'readers_until', 'readers_gone', 'fence',
  'q:head', 'q:tail', 'queue_until', 'u:owner', 'u:until', 'u:upgrade', 'u:others', 'u:wanted',
  'shares' }
for i = 1, #layout.fields do
  LOCK_FIELDS[#LOCK_FIELDS + 1] = layout.fields[i]
end

-- Reads the lock for an operation of `token` ('' for none): the summaries, the
-- token's own fields and the layout's. Expired holds are noted as changes (written
-- by `settle`; a read-only script never writes them), and so is the grant of a
-- batch of readers that nothing keeps out any more (unless `as_found`). `now`,
-- `now_us`: the server's clock, if a fast path read it already. Raises WRONGTYPE
-- before any write.
local function load(token, as_found, now, now_us)
  if not now then
    now, now_us = server_time()
  end
  local read_field, wait_field, next_field = 'r:' .. token, 'wait:' .. token, 'wn:' .. token
  local member_field = 'rw:' .. token
  local v = redis.call('HMGET', KEY, read_field, wait_field, next_field, member_field,
    unpack(LOCK_FIELDS))
  -- `h`: the fields present, by name (most are absent: they are left out).
  local h = { [read_field] = v[1] or nil, [wait_field] = v[2] or nil, [next_field] = v[3] or nil,
    [member_field] = v[4] or nil }
  -- The token's own queue fields are known too (`fields` asks for no field twice).
  local known = { [wait_field] = v[2], [next_field] = v[3] }
  for i = 1, #LOCK_FIELDS do
    if v[i + 4] then
      h[LOCK_FIELDS[i]] = v[i + 4]
    end
  end
  local s = { now = now, now_us = now_us, token = token, h = h, changes = {}, known = known,
    fence = tonumber(h['fence']) or 0, nreaders = tonumber(h['readers']) or 0,
    readers_until = tonumber(h['readers_until']) or 0, gone = tonumber(h['readers_gone']) or 0,
    others_until = tonumber(h['u:others']) or 0, shares = tonumber(h['shares']) or 0,
    head = h['q:head'], tail = h['q:tail'], queue_until = tonumber(h['queue_until']) or 0,
    freed_writer = false, dequeued = false, extended = false,
    upgradable_ended = false, upgrade_ended = false }

  if h['w:owner'] then
    local deadline = tonumber(h['w:until']) or 0
    if deadline > now then
      s.writer, s.writer_until = h['w:owner'], deadline
    else
      del(s, 'w:owner')
      del(s, 'w:until')
      layout.clear_write(s)
      s.freed_writer = true
    end
  end
  -- Every counted reader expired: what they left behind is no longer counted.
  if s.nreaders > 0 and s.readers_until <= now then
    s.gone, s.nreaders, s.readers_until = s.readers_until, 0, 0
    set(s, 'readers_gone', int(s.gone))
    del(s, 'readers')
    del(s, 'readers_until')
    batches.forget(s)
    sweep_leftovers(s)
  end
  -- The upgradable reader (its deadline is its `r:` field's, so it expires with it)
  -- and its pending upgrade.
  if h['u:owner'] then
    local deadline = tonumber(h['u:until']) or 0
    if deadline > now then
      s.upgradable, s.upgradable_until = h['u:owner'], deadline
      if h['u:upgrade'] then
        local deadline, first_lease = parse_place(h['u:upgrade'])
        if deadline > now then
          s.upgrade = { deadline = deadline, first_lease = first_lease }
        else
          end_upgrade(s)
        end
      end
    else
      end_upgradable(s)
    end
  end
  -- The token's read hold (counted; live while its deadline is ahead), or its leftover.
  local mine = tonumber(h[read_field])
  if mine and mine > s.gone then
    s.mine = mine
  elseif mine then
    s.leftover = true
  end
  -- The token's place in the writers' queue.
  if h[wait_field] then
    s.place = parse_place(h[wait_field])
  end
  s.linked = token ~= '' and (h[next_field] ~= nil or s.head == token or s.tail == token)
  -- The batch the token's reader waits in, or holds by (`mine`: its share counts).
  if h[member_field] then
    local batch, own = parse_place(h[member_field])
    -- Its count too: leaving the batch, or the batch's grant, needs it next.
    local b = fields(s, { 'rg:' .. batch, 'wait:' .. batch, 'rn:' .. batch })
    if b[1] then
      s.grouped = batch
      if tonumber(b[1]) > s.gone then
        -- Its share ends with the grant, or with its own place if that is earlier.
        s.mine = min(tonumber(b[1]), own)
      end
    elseif b[2] then
      local deadline, first_lease = parse_place(b[2])
      s.batch, s.batch_place = batch, { deadline = deadline, first_lease = first_lease }
      s.member_until = own
      if deadline <= now or own <= now then
        batches.leave(s, batch, false) -- its place lapsed: it waits in line no more
      end
    else
      del(s, member_field) -- a batch that no longer exists
    end
  end

  layout.original_holds(s, h)
  if not as_found then
    batches.serve(s)
  end
  return s
end

-- True when the token holds a live read hold.
local function reading(s)
  return s.mine ~= nil and s.mine > s.now
end

-- True when an original-design client holds in a mode that conflicts with our hold
-- in mode `write` (true: write, false: read). It can only have entered after judging
-- our stamp stale, so our hold no longer excludes it: renewals and fenced writes
-- report the hold lost instead of going on beside it.
local function original_beside(s, write)
  return s.original_writer_until ~= nil or (write and s.original_reader_until ~= nil)
end

-- True when neither our holders nor an original client's hold the lock.
local function is_free(s)
  return not s.writer and not s.original_writer_until and s.nreaders == 0
    and not s.original_reader_until
end

-- The latest deadline among the holds: when the lock frees itself if nobody renews.
local function holds_until(s)
  local readers = 0
  if s.nreaders > 0 then
    readers = s.readers_until
  end
  return max(s.writer_until or 0, readers, s.original_writer_until or 0,
    s.original_reader_until or 0)
end

-- Milliseconds a refused caller may sleep before the holds could have expired, or
-- (`line`: a reader that only the line keeps out) before the places in line could
-- have lapsed.
local function retry_hint(s, line)
  local until_ = holds_until(s)
  if line then
    until_ = s.queue_until
  end
  return max(until_ - s.now, 1)
end

-- Grants (or renews) the token a read hold of `lease` ms (the upgradable hold's
-- deadline moves with it). A renewal never shortens the hold: a resent or late
-- command with a shorter lease leaves the later deadline, which its holder may
-- count on.
local function hold_read(s, lease)
  local deadline = max(s.now + lease, s.mine or 0)
  if s.grouped then
    batches.leave(s, s.grouped, true) -- its share of a batch's grant becomes its own field
  end
  if not s.mine then
    s.nreaders = s.nreaders + 1
    set(s, 'readers', s.nreaders)
  end
  s.mine = deadline
  set(s, 'r:' .. s.token, int(deadline))
  if deadline > s.readers_until then
    s.readers_until = deadline
    set(s, 'readers_until', int(deadline))
  end
  if s.upgradable == s.token then
    s.upgradable_until = deadline
    set(s, 'u:until', int(deadline))
  elseif s.upgradable and deadline > s.others_until then
    s.others_until = deadline
    set(s, 'u:others', int(deadline))
  end
  layout.stamp_read(s)
  s.extended = true
end

-- The token's read hold (just granted) becomes the upgradable one; `others_until`:
-- no other counted reader's deadline is later.
local function hold_upgradable(s, others_until)
  s.upgradable, s.upgradable_until = s.token, s.mine
  set(s, 'u:owner', s.token)
  set(s, 'u:until', int(s.mine))
  if others_until > 0 then
    s.others_until = others_until
    set(s, 'u:others', int(others_until))
  end
end

-- Grants (or renews) the write hold of `lease` ms to `token`. Renewing never
-- shortens it: an upgrade's hold lasts at least as long as the read hold it
-- replaced, and a resent upgrade or acquire (the write lease only) must not cut that.
local function hold_write(s, token, lease)
  local deadline = s.now + lease
  if s.writer == token then
    deadline = max(deadline, s.writer_until)
  end
  s.writer, s.writer_until = token, deadline
  layout.stamp_write(s)
  s.extended = true
end

-- The fence a refusal reports: no hand-over after it can carry a smaller one, and
-- every hand-over before it carries a smaller one, also one from before the key
-- expired and took the counter with it (a new fence is at least the server time
-- in µs, and a key expires only a second after its last hold).
local function refusal_fence(s)
  return max(s.fence, s.now_us)
end

-- A new write hold: the next fencing token, returned.
local function grant_write(s, token, lease)
  s.fence = max(s.fence + 1, s.now_us)
  set(s, 'fence', int(s.fence))
  hold_write(s, token, lease)
  return s.fence
end

-- `token`'s counted read hold ends (with the upgradable hold, if it was that); the
-- read stamp goes with the last one unless an original reader holds.
local function drop_reader(s, token)
  if token == s.upgradable then
    end_upgradable(s)
  end
  del(s, 'r:' .. token)
  if token == s.token then
    if s.grouped then
      batches.leave(s, s.grouped, true)
    end
    s.mine = nil
  end
  s.nreaders = s.nreaders - 1
  if s.nreaders > 0 then
    set(s, 'readers', s.nreaders)
  else
    s.readers_until = 0
    del(s, 'readers')
    del(s, 'readers_until')
    layout.clear_read(s)
  end
end

-- The caller's plain reader waits in line (writer preference): in its batch, or in
-- the batch at the tail of the line, or in a new batch it starts there; its wait
-- keeps the batch's place for `ttl` ms (a batch lives while any of its readers
-- comes back). Returns the batch's name.
function batches.join(s, ttl, first_lease)
  -- A hold it had expired (it would be granted otherwise): it ends here, so the
  -- batch's grant counts it once.
  if s.mine then
    drop_reader(s, s.token)
  elseif s.grouped then
    batches.leave(s, s.grouped, true)
  elseif s.leftover then
    del(s, 'r:' .. s.token)
  end
  local batch, place = s.batch, s.batch_place
  if not batch then
    -- The batch at the tail, if its place is live; else a new one (its name from
    -- `rseq`). One HMGET asks for all it may need.
    local count
    if s.tail and is_batch(s.tail) then
      local v = fields(s, { 'wait:' .. s.tail, 'rn:' .. s.tail, 'rseq' })
      if v[1] then
        local deadline, lease = parse_place(v[1])
        if deadline > s.now then
          batch, place, count = s.tail, { deadline = deadline, first_lease = lease }, v[2]
        end
      end
    end
    if not batch then
      local n = max((tonumber(fields(s, { 'rseq' })[1]) or 0) + 1, s.now_us)
      set(s, 'rseq', int(n))
      batch = 'r#' .. int(n)
    end
    set(s, 'rn:' .. batch, (tonumber(count) or 0) + 1)
  end
  local deadline = join_queue(s, batch, place ~= nil, ttl, first_lease, place)
  s.batch, s.batch_place = batch, { deadline = deadline, first_lease = max(first_lease,
    place and place.first_lease or 0) }
  -- Its own place: the batch's lives while any of its readers comes back.
  s.member_until = s.now + ttl
  set(s, 'rw:' .. s.token, batch .. ':' .. int(s.member_until))
  return batch
end

-- The shares of granted batches whose readers' own places have lapsed end: a
-- reader that died while it waited in line blocks nobody past its place, also when
-- its batch was granted after it died. Looks only while some share counts
-- (`shares`), through every `rw:` field (HSCAN pages), for a waiting writer or an
-- upgrade: live readers claim their shares at once (their release or first
-- renewal), so it runs in a waiter's re-check right after a grant, or when a reader
-- died in line.
function batches.drop_lapsed(s)
  if s.shares == 0 then
    return
  end
  local cursor = '0'
  repeat
    local page = redis.call('HSCAN', KEY, cursor, 'MATCH', 'rw:*', 'COUNT', 100)
    cursor = page[1]
    local found = page[2]
    for i = 1, #found, 2 do
      local batch, own = parse_place(found[i + 1])
      local token = sub(found[i], 4)
      if own <= s.now and token ~= s.token and s.changes[found[i]] == nil then
        local granted = tonumber(fields(s, { 'rg:' .. batch })[1])
        if granted and granted > s.gone then
          batches.drop_member(s, token, batch, true)
          batches.add_shares(s, -1)
          drop_reader(s, token)
        end
      end
    end
  until cursor == '0'
end

local function drop_writer(s)
  del(s, 'w:owner')
  del(s, 'w:until')
  layout.clear_write(s)
  s.writer, s.writer_until = nil, nil
  s.freed_writer = true
end

-- True when the upgradable reader is the only reader left (an original reader
-- counts too), or every other one has expired: nothing but its own read hold
-- stands between it and the write hold, which no other writer can have taken
-- meanwhile. (Its own renewals keep `readers_until` ahead, so a reader that
-- vanished without releasing is judged by `u:others` instead.)
local function upgrade_ready(s)
  return s.upgradable ~= nil and (s.nreaders == 1 or s.others_until <= s.now)
    and not s.original_reader_until and not s.writer and not s.original_writer_until
end

-- The upgradable reader becomes the writer in one step, with a new fencing token
-- (returned). The write hold lasts `lease`, but never ends before the read hold it
-- replaces would have: its holder may still count on that one.
local function upgrade_to_write(s, lease)
  local token, read_until, others_until = s.upgradable, s.upgradable_until, s.others_until
  del(s, 'u:owner')
  del(s, 'u:until')
  del(s, 'u:others')
  if s.upgrade or s.h['u:upgrade'] then
    del(s, 'u:upgrade')
  end
  if s.h['u:wanted'] or s.changes['u:wanted'] then
    del(s, 'u:wanted') -- waiting upgradable readers now wait for the writer
  end
  s.upgradable, s.upgradable_until, s.upgrade = nil, nil, nil
  drop_reader(s, token)
  if s.nreaders > 0 then
    -- Only readers that expired without releasing are left: leftovers now.
    s.gone = max(s.gone, others_until)
    set(s, 'readers_gone', int(s.gone))
    s.nreaders, s.readers_until = 0, 0
    del(s, 'readers')
    del(s, 'readers_until')
    layout.clear_read(s)
    batches.forget(s)
    sweep_leftovers(s)
  end
  return grant_write(s, token, max(lease, read_until - s.now))
end

-- Keeps the key alive past every deadline (`keep_alive`).
local function set_expiry(s)
  local queue = 0
  if s.head then
    queue = s.queue_until
  end
  keep_alive(max(max(holds_until(s), queue) - s.now, 0))
end

-- The end of every script that may change the lock: hands the lock on when it can
-- go to a waiter (the upgradable reader waiting to upgrade, once it is the last
-- reader; else, once the lock is free, the first queued writer), writes the
-- changes, keeps the key alive past the deadlines it extended, and tells the
-- waiters who may go:
--   "<token>:<fence>"  the lock was handed to that writer or upgrader (it holds now);
--   "*"                it is free and nobody queues, after a writer left or the queue
--                      emptied (readers that waited behind them);
--   "r"                readers hold but no writer does any more, after a writer left,
--                      or the queue or the pending upgrade that kept readers out went;
--   "u"                the upgradable hold ended, the lock is not written, and an
--                      upgradable acquire was refused meanwhile (`u:wanted`):
--                      another upgradable reader may go.
-- Nobody else can be waiting: a waiting writer always queues, a reader waits only
-- behind a writer, the queue or a pending upgrade, an upgradable reader also behind
-- the upgradable hold.
local function settle(s)
  if s.dequeued then
    first_in_line(s) -- takes out withdrawn places at the head: is the line empty?
  end
  -- A handed hold lasts its first lease but never outlives the place it was handed
  -- to: a waiter that died just before its place lapsed blocks nobody longer than
  -- the place would have.
  local handed
  if s.upgrade and upgrade_ready(s) then
    local token, upgrade = s.upgradable, s.upgrade
    local lease = min(upgrade.first_lease, upgrade.deadline - s.now)
    handed = token .. ':' .. int(upgrade_to_write(s, lease))
  else
    batches.serve(s)
    if is_free(s) then
      local first, first_lease, deadline = first_in_line(s)
      if first and not is_batch(first) then
        serve_head(s)
        local lease = min(first_lease, deadline - s.now)
        handed = first .. ':' .. int(grant_write(s, first, lease))
      end
    end
  end
  -- An upgradable waiter was refused by the hold that ended: it is told below.
  local wanted = s.upgradable_ended and s.h['u:wanted'] ~= nil
  if wanted then
    del(s, 'u:wanted')
  end
  flush(s)
  if s.extended then
    set_expiry(s)
  end
  local written = s.writer or s.original_writer_until
  if s.granted then
    -- The batch's readers hold; to other readers it is an 'r' (a writer left).
    publish(s.granted)
  end
  if handed then
    publish(handed)
  elseif s.granted then
    return
  elseif is_free(s) then
    if s.freed_writer or s.dequeued or s.upgrade_ended or wanted then
      publish('*')
    end
  elseif not written and (s.freed_writer or (not s.head and (s.dequeued or s.upgrade_ended))) then
    publish('r')
  elseif not written and wanted then
    publish('u')
  end
end
