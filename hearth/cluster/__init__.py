"""hearth on Ray: engine replicas as Ray actors behind one HTTP front end (`hearth cluster serve`).

router.py picks a replica per request; replica.py is the actor body (one LLM + AsyncEngine);
remote_engine.py is the engine the API's routes see, forwarding to the replicas; launch.py connects
to Ray, places the replicas and waits until every one has loaded. Ray is imported only here, lazily:
it is an optional extra (`pip install -c constraints.txt '.[cluster]'`)."""
