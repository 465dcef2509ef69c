-- Argo CD health check for kraft.dev/KRaftQuorum (Lua 5.1, as Argo CD's gopher-lua).
-- The operator folds the pods' state into the resource's own conditions, so the health is
-- read from them and from observedGeneration, which the operator sets only once the spec is
-- fully realized:
--   deletion pending, or no status yet             -> Progressing
--   Degraded=True reason QuorumLost                -> Degraded (nothing heals without a human)
--   ReconciliationPaused=True or AwaitingApproval  -> Suspended
--   Degraded=True reason RolloutHalted             -> Degraded
--   Progressing=True (a rollout, scale, join, ...) -> Progressing, never Degraded
--   Degraded=True (any other reason)               -> Degraded
--   observedGeneration behind metadata.generation  -> Progressing
--   Ready=True                                     -> Healthy
--   otherwise                                      -> Progressing
local hs = {}

local function condition(name)
  if obj.status == nil or obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == name then
      return c
    end
  end
  return nil
end

local function is_true(c)
  return c ~= nil and c.status == "True"
end

local function say(c, fallback)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    return c.message
  end
  if c ~= nil and c.reason ~= nil and c.reason ~= "" then
    return c.reason
  end
  return fallback
end

if obj.metadata ~= nil and obj.metadata.deletionTimestamp ~= nil then
  hs.status = "Progressing"
  hs.message = "Deletion pending"
  return hs
end

if obj.status == nil or obj.status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe the quorum"
  return hs
end

local degraded = condition("Degraded")
if is_true(degraded) and degraded.reason == "QuorumLost" then
  hs.status = "Degraded"
  hs.message = say(degraded, "The quorum is lost")
  return hs
end

local paused = condition("ReconciliationPaused")
if is_true(paused) then
  hs.status = "Suspended"
  hs.message = say(paused, "Reconciliation is paused")
  return hs
end

local approval = condition("AwaitingApproval")
if is_true(approval) then
  hs.status = "Suspended"
  hs.message = say(approval, "Awaiting approval")
  return hs
end

if is_true(degraded) and degraded.reason == "RolloutHalted" then
  hs.status = "Degraded"
  hs.message = say(degraded, "The rollout is halted")
  return hs
end

local progressing = condition("Progressing")
if is_true(progressing) then
  hs.status = "Progressing"
  hs.message = say(progressing, "Progressing")
  return hs
end

if is_true(degraded) then
  hs.status = "Degraded"
  hs.message = say(degraded, "Degraded")
  return hs
end

local generation = obj.metadata and obj.metadata.generation
if generation ~= nil and obj.status.observedGeneration ~= generation then
  hs.status = "Progressing"
  hs.message = "Waiting for generation " .. tostring(generation) .. " to be realized"
  return hs
end

local ready = condition("Ready")
if is_true(ready) then
  hs.status = "Healthy"
  hs.message = say(ready, "Ready")
  return hs
end

hs.status = "Progressing"
hs.message = say(ready, "Waiting for the quorum to be ready")
return hs
