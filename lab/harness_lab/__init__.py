"""Tools built on the harness core: reliability (soak, faults, hostile), scale-out, peers. Each
takes every deployment-specific value from its arguments or the deployment's manifest."""
