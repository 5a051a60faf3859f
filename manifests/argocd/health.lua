-- Argo CD health check for ksched.io SchedulerProfile and LeafClusterPolicy (kstatus conditions).
-- Healthy: Ready=True for the current generation. Progressing: not observed yet, or Reconciling.
-- Degraded: Stalled=True (also OperatorStopped after ksched was uninstalled), or Ready=False for a
-- reason that needs the user to act (ApplyFailed, Conflict, InvalidConfiguration, NameInUse, ...).
-- Ready=False while Reconciling (NoLeader: no scheduler renews the Lease; OperatorStopped: the
-- operator that ran an Embedded scheduler stopped and another takes over) is Progressing.
-- Lua 5.1 compatible (Argo CD runs gopher-lua).
local hs = { status = "Progressing", message = "Waiting for the ksched operator" }
if obj.status == nil then
  return hs
end
local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and (observed == nil or observed < generation) then
  hs.message = "Waiting for the ksched operator to observe generation " .. tostring(generation)
  return hs
end
local ready, reconciling, stalled = nil, nil, nil
if obj.status.conditions ~= nil then
  for _, c in ipairs(obj.status.conditions) do
    if c.type == "Ready" then
      ready = c
    elseif c.type == "Reconciling" then
      reconciling = c
    elseif c.type == "Stalled" then
      stalled = c
    end
  end
end
-- Reasons that need a change by the user (to the spec, or to what it conflicts with).
local stalled_reasons = {
  InvalidConfiguration = true, InvalidSpec = true, ApplyFailed = true, SchedulerNameInUse = true,
  NameInUse = true, Conflict = true, ForeignTaint = true, ProfileNotFound = true,
}
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = stalled.reason .. ": " .. (stalled.message or "")
  return hs
end
if ready ~= nil and ready.status == "False" and stalled_reasons[ready.reason] then
  hs.status = "Degraded"
  hs.message = ready.reason .. ": " .. (ready.message or "")
  return hs
end
if reconciling ~= nil and reconciling.status == "True" then
  hs.message = reconciling.reason .. ": " .. (reconciling.message or "")
  return hs
end
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = ready.reason .. ": " .. (ready.message or "")
  return hs
end
if ready ~= nil then
  hs.message = ready.reason .. ": " .. (ready.message or "")
end
return hs
