#!/bin/sh
# Open MPI's remote launch agent (plm_rsh_agent) for test hosts made of
# network namespaces: "netns_agent.sh HOST COMMAND..." runs the command, as
# ssh would (its words joined, through a shell), inside namespace HOST and a
# UTS namespace of its own whose host name is HOST, so that each host's
# daemon and ranks report a distinct node name.
host="$1"
shift
exec ip netns exec "$host" unshare --uts sh -c "hostname '$host' && $*"
