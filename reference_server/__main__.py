from reference_server.serve import main

main()
