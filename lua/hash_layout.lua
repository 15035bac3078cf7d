-- hash_layout.lua: the layout's hooks when everything is in the lock's one hash.
-- Clients of the original design look only at two stamps of that hash, which we
-- keep true for them:
--   write      ms  server time of our writer's acquire/renewal, or an original client's stamp
--   wstamp     ms  the `write` value we wrote last (a different `write` came from an original client)
--   read       ms  server time of the latest reader acquire/renewal
--   rstamp     ms  the `read` value we wrote last (a different `read` came from an original client)
--   orig:read  ms  deadline of an original reader whose `read` stamp we overwrote

-- The fields `load` reads for these hooks (after its own, in this order).
layout.fields = { 'write', 'wstamp', 'read', 'rstamp', 'orig:read' }

-- Finds the original clients' holds in `h` (the fields read): sets
-- s.original_writer_until and s.original_reader_until (deadlines, or nil) and
-- deletes the stale stamps. An original client holds while `now - stamp <= its
-- timeout`, so the deadlines are inclusive.
function layout.original_holds(s, h)
  -- `write` is ours while it equals `wstamp`; another value is an original writer's
  -- stamp (also when our writer's lease ran out and an original writer came next).
  if h['write'] and h['write'] ~= h['wstamp'] then
    local deadline = tonumber(h['write']) + ORIGINAL_WRITE
    if deadline >= s.now then
      s.original_writer_until = deadline
    else
      del(s, 'write')
      s.freed_writer = true
    end
  end
  -- Original readers: a `read` stamp we did not write, or one we overwrote.
  local reader_until = tonumber(h['orig:read']) or 0
  if h['read'] and h['read'] ~= h['rstamp'] then
    reader_until = max(reader_until, tonumber(h['read']) + ORIGINAL_READ)
  end
  if reader_until > 0 and reader_until >= s.now then
    s.original_reader_until = reader_until
  else
    if h['orig:read'] then
      del(s, 'orig:read')
    end
    if h['read'] and s.nreaders == 0 then
      del(s, 'read')
      del(s, 'rstamp')
    end
  end
end

-- Our readers hold (one acquired or renewed): stamps `read`, keeping an original
-- reader's deadline.
function layout.stamp_read(s)
  set(s, 'read', int(s.now))
  set(s, 'rstamp', int(s.now))
  if s.original_reader_until then
    set(s, 'orig:read', int(s.original_reader_until))
  end
end

-- Our last reader left.
function layout.clear_read(s)
  if not s.original_reader_until then
    del(s, 'read')
    del(s, 'rstamp')
  end
end

-- Our writer holds (acquired, renewed or handed the lock): writes its owner,
-- deadline and stamp.
function layout.stamp_write(s)
  set(s, 'w:owner', s.writer)
  set(s, 'w:until', int(s.writer_until))
  set(s, 'write', int(s.now))
  set(s, 'wstamp', int(s.now))
end

-- Our writer left (released, expired or downgraded): its stamp goes, unless an
-- original writer's stamp replaced it.
function layout.clear_write(s)
  if s.h['write'] == s.h['wstamp'] then
    del(s, 'write')
    del(s, 'wstamp')
  end
end

-- Every hold ends (force release): original clients' too.
function layout.clear_all(s)
  for _, field in ipairs({ 'write', 'wstamp', 'read', 'rstamp', 'orig:read' }) do
    del(s, field)
  end
end
