from dsbisect.cli import main

main()
